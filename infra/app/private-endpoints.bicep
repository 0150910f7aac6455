// Private endpoints for one storage account: one per storage service the app uses there, each
// registered in that service's private DNS zone (infra/app/network.bicep), so that the
// account's usual host name (ACCOUNT.blob.core.windows.net) resolves to the endpoint inside
// the network. Only the services in use get one: an endpoint nothing uses is a way in for nothing.

@description('Name of the storage account.')
param accountName string

@description('Storage services of the account to reach privately: blob, queue, table.')
param services array

@description('Subnet the endpoints are placed in.')
param subnetId string

@description('Private DNS zone id per service: {blob, queue, table}.')
param dnsZoneIds object

@description('Azure region of the endpoints (the network\'s).')
param location string

@description('Tags applied to the endpoints.')
param tags object

resource account 'Microsoft.Storage/storageAccounts@2023-05-01' existing = {
  name: accountName
}

resource endpoints 'Microsoft.Network/privateEndpoints@2023-11-01' = [for service in services: {
  name: 'pe-${accountName}-${service}'
  location: location
  tags: tags
  properties: {
    subnet: {
      id: subnetId
    }
    privateLinkServiceConnections: [
      {
        name: '${accountName}-${service}'
        properties: {
          privateLinkServiceId: account.id
          groupIds: [
            service
          ]
        }
      }
    ]
  }
}]

resource dnsGroups 'Microsoft.Network/privateEndpoints/privateDnsZoneGroups@2023-11-01' = [for (service, i) in services: {
  parent: endpoints[i]
  name: 'default'
  properties: {
    privateDnsZoneConfigs: [
      {
        name: service
        properties: {
          privateDnsZoneId: dnsZoneIds[service]
        }
      }
    ]
  }
}]
